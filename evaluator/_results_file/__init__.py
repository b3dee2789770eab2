"""The results file: ``_store`` writes it (header, lock, resume, safe repair) and
``_reader`` reads it back line by line (what may be repaired, what is refused); ``_load``
reads it whole for a report. The header's key and format are ``evaluator._fingerprint``'s."""
