"""One module per chapter: what the chapter trains, and the figures and tables it shows.

A chapter notebook calls these helpers one per cell; nothing here imports a notebook.
"""
