"""What the Airflow DAGs call: run folders, parameters, launchers, operators, publishing.

The stage libraries (`beam_jobs/`, `training/`) know nothing of Airflow or of
each other's runs; this package wires them into a pipeline run. It may import
the stages' light modules (configs, no TensorFlow or Beam at import) and the
contracts (`shardspec`, `runspec`, `stageconfig`). Homes: `launchers/` (one
module per way to start the trainers, each with its typed options, rendering
and submission), `train_operator` and `dataflow_job` (the DAG's two operators,
which reconnect to remote jobs on retry and honour the stages' exit codes),
`params` (DAG Params from the stage configs, rules between stages), `runs`
(a pipeline run's folders), `reuse`, `evaluation`, `plots`, `summary`,
`publish`, `approval`, `lineage`. The operators import Airflow and its
providers' hooks at the top; everything else imports providers inside
functions only, so DAG files stay cheap to parse.
"""
