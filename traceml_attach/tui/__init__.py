"""The live Textual TUI: ``present`` turns a live document into view-models, widgets draw them."""
