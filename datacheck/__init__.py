"""The data checks between sharding and training: this run's dataset statistics against
those of the data the serving model was trained on (TFX's ExampleValidator, for image
folders). TensorFlow-free; the DAG's check_data task and `python -m datacheck` run it."""
