"""The dataset: reading JSONL / JSON / CSV files into rows (``_datafile``), and rows into
``Example`` values with their ids (``_dataset``)."""
