"""What the Airflow DAGs call: run folders, parameters, launchers, publishing.

The stage libraries (`beam_jobs/`, `training/`) know nothing of Airflow or of
each other's runs; this package wires them into a pipeline run. It may import
the stages' light modules (configs, no TensorFlow or Beam at import) and
Airflow providers inside functions only, so DAG files stay cheap to parse.
"""
