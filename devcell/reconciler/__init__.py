"""Reconciler: the engine that drives controllers (plan execution, operation recording, convergence)."""
