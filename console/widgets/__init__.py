"""The console's Textual widgets, one module each; they render state and never do I/O."""
