"""PySpark jobs that replay logs in parallel, with the compiled extension on the executors."""
