"""What a session produces: the summary document, its text, the live document."""
