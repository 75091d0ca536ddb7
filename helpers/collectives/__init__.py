"""The collectives themselves, for notebooks 01-13: the registry every module reads
(registry.py), their NumPy models and example inputs, the record's arrays, a record
against the model (model_check.py), and the modules of one notebook each (all_to_all 08, p2p 09, ring 10, support and support_tables 12)."""
