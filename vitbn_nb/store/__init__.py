"""The run store: a run's configuration, its folder and record, training runs and keeping them, bundles exchanged
between machines, the records committed with the book."""
