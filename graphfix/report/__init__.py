"""The run's report: its data model, the terminal summary, Markdown, HTML, the writer."""
