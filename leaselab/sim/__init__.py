"""Deterministic simulation: the real queue and the real worker's decisions on virtual time (``world``),
checked step by step against an executable specification (``model``), explored at random or
exhaustively, shrunk and replayed (``explore``), with planted bugs it must catch (``mutants``)."""
