"""What every experiment driver shares: Markdown tables and cells, grid files."""
