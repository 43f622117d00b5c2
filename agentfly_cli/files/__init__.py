"""Files and text from outside: JSON files users give us, output paths written all-or-nothing, run
folders, printable text.
"""
