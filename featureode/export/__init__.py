"""What leaves the tool for a reader: LaTeX documents, reports and diagnostic figures."""
