"""Getting text out of a document: PDF text layers, Word .docx, HTML and plain text, each
bounded and refused in one line when it cannot be read.

Pure Python (pypdf, python-docx); never the engine or Qt.
"""
