// Render Markdown documents with marked (GitHub-flavoured, as a README or a CI summary page is).
// stdin: a JSON array of Markdown texts; stdout: a JSON array of the HTML marked makes of each.
import { marked } from 'marked';

let input = '';
for await (const chunk of process.stdin) input += chunk;
const results = JSON.parse(input).map((text) => marked.parse(text, { gfm: true }));
process.stdout.write(JSON.stringify(results));
