// Parse Mermaid diagrams with mermaid's own parser (the one that renders them in GitHub/GitLab).
// stdin: a JSON array of diagram texts; stdout: a JSON array, per diagram null (parsed) or the
// parser's error message. mermaid sanitizes labels with DOMPurify, which needs a DOM: jsdom's.
import { JSDOM } from 'jsdom';

const { window } = new JSDOM('');
globalThis.window = window;
globalThis.document = window.document;
const { default: mermaid } = await import('mermaid');

let input = '';
for await (const chunk of process.stdin) input += chunk;
const results = [];
for (const text of JSON.parse(input)) {
  try {
    await mermaid.parse(text);
    results.push(null);
  } catch (err) {
    results.push(String(err?.message ?? err));
  }
}
process.stdout.write(JSON.stringify(results));
