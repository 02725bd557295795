"""The suite's helpers, imported by package name: ``from tests.support.polling import wait_until``.

Some are also run as programs or imported by other processes, by path or by name:
``stall.py`` and ``run_notebook.py`` are scripts (``python tests/support/stall.py -- ...``), and
``chaos_handlers`` is given to ``leaselab chaos`` as ``tests.support.chaos_handlers:transfer``, with the
repository's folder on the workers' PYTHONPATH.
"""
