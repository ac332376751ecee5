"""The run store: a run's configuration, its folder, record and lock, the tables of the runs it holds, bundles exchanged
between machines, the records committed with the book. Training runs into it is :mod:`vitbn_nb.engines.training`."""
