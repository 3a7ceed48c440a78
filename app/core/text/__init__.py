"""Text for people: Markdown to rich-text HTML, and numbers worded the same everywhere.

Qt-free, so the desktop app and any other front end render replies and figures alike,
and tests check them as plain functions.
"""
