"""The reports: Markdown, HTML, Mermaid, and model strings kept inert in each."""
