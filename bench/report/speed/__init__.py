"""The report's speed section (rows with batch-1 seconds only): ``section`` (the item and its
page), ``cells`` (the settings from the rows and records), ``tables`` (AUP, speed-ups over AR),
``draw`` (its figures)."""
