import json

import pytest

from training.distribute import cluster_from_env
from training.launch import tf_config


def test_no_tf_config_is_a_single_chief_worker():
    cluster = cluster_from_env({})
    assert (cluster.num_workers, cluster.is_chief, cluster.multi_worker) == (1, True, False)


def test_worker_zero_is_chief_without_a_chief_task():
    env = {"TF_CONFIG": tf_config([1111, 2222], 0)}
    assert cluster_from_env(env).is_chief
    env = {"TF_CONFIG": tf_config([1111, 2222], 1)}
    worker = cluster_from_env(env)
    assert not worker.is_chief and worker.num_workers == 2 and worker.name == "worker-1"


def test_a_chief_task_is_the_chief_and_worker_zero_is_not():
    cluster = {"chief": ["a:1"], "worker": ["b:1", "c:1"]}
    chief = cluster_from_env(
        {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "chief", "index": 0}})}
    )
    worker0 = cluster_from_env(
        {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}})}
    )
    assert chief.is_chief and not worker0.is_chief and chief.num_workers == 3


def test_malformed_tf_config_is_a_clear_error():
    with pytest.raises(ValueError, match="TF_CONFIG is not valid"):
        cluster_from_env({"TF_CONFIG": '{"cluster": {}}'})


def test_a_ps_task_is_the_input_service_not_a_trainer():
    cluster = {"chief": ["a:1"], "worker": ["b:1"], "ps": ["svc:2222"]}
    env = {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}})}
    worker = cluster_from_env(env)
    assert worker.input_service == "svc:2222" and worker.num_workers == 2
    assert worker.trainers == {"chief": ["a:1"], "worker": ["b:1"]}
    assert cluster_from_env({"TF_CONFIG": tf_config([1111, 2222], 0)}).input_service == ""


def test_the_service_reads_its_own_address_from_tf_config():
    from training.input_service import own_address

    cluster = {"chief": ["a:1"], "ps": ["workerpool2-0:2222"]}
    tf = json.dumps({"cluster": cluster, "task": {"type": "ps", "index": 0}})
    assert own_address(tf) == ("workerpool2-0", 2222)
    with pytest.raises(ValueError, match="no address for this task"):
        own_address(json.dumps({"cluster": cluster, "task": {"type": "ps", "index": 1}}))
