"""The S-FLM paper inside the report: its reported numbers (``numbers``: ``results/paper``), its
tables and figures by label (``catalogue``: every label; ``tables``, ``curves``: the generic
renderers) and the ``--paper`` / ``--figure`` / ``--list`` command (``command``)."""
