"""PySpark data source and job-event analytics. Not built yet."""
