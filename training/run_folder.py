"""The trainer's side of the run folder (runspec): where each worker writes, what a
rerun may resume, and the files the chief keeps up to date.

Every worker must save checkpoints and the model (saving runs collectives), but only
the chief's copies are the run's: the others write into their own throw-away folder.
Reads and writes go through TensorFlow's file systems (local paths and gs:// alike).
"""

from __future__ import annotations

import json
import posixpath

import tensorflow as tf

from runspec.layout import CHECKPOINTS, CONFIG, METRICS, RUN_FILES, WORKER_TMP
from runspec.record import metrics_document
from training.config import ConfigError, resume_conflicts
from training.distribute import ClusterInfo


class RunFolder:
    """One worker's view of `--output`."""

    def __init__(self, output: str, cluster: ClusterInfo):
        self.output = output
        self.cluster = cluster

    def path(self, name: str) -> str:
        return posixpath.join(self.output, name)

    def write_dir(self, name: str) -> str:
        """Where this worker writes `name`: the real place on the chief, a private
        temporary folder elsewhere."""
        if self.cluster.is_chief:
            return self.path(name)
        return posixpath.join(self.output, WORKER_TMP, self.cluster.name, name)

    def latest_checkpoint(self) -> str | None:
        return tf.train.latest_checkpoint(self.path(CHECKPOINTS))

    def write_config(self, effective: dict) -> None:
        """The effective parameters, beside the run's outputs from its start (not only in
        the exported model's metadata), so a run in progress or killed says what it ran."""
        tf.io.gfile.makedirs(self.output)
        with tf.io.gfile.GFile(self.path(CONFIG), "w") as handle:
            json.dump(effective, handle, indent=2)

    def check_resumable(self, effective: dict) -> None:
        """The folder is new, or a run folder of this trainer whose checkpoints a run of
        the same parameters resumes; else ConfigError, before anything is written. Other
        parameters would restore into another model or silently mix two recipes, and a
        folder of the user's holding `model/` or `config.json` would be overwritten."""
        saved = None
        try:
            with tf.io.gfile.GFile(self.path(CONFIG)) as handle:
                saved = json.load(handle)
        except (tf.errors.NotFoundError, ValueError):
            pass
        if not isinstance(saved, dict) or "total_steps" not in saved:  # the run writes it first
            if theirs := self._foreign_entries():
                raise ConfigError(
                    f"--output {self.output} holds {', '.join(theirs)} that this trainer did "
                    f"not write (no {CONFIG} of its run): a run would replace or mix with "
                    "them; give a new or empty folder, or a run folder of this trainer to resume"
                )
            return
        if not self.latest_checkpoint():
            return  # nothing to resume: the run starts anew and rewrites its config
        if conflicts := resume_conflicts(saved, effective):
            raise ConfigError(
                f"--output {self.output} holds a run with other parameters "
                f"({'; '.join(conflicts)}): its checkpoints resume only the same run; give "
                "another --output to train anew, or the run's parameters to resume it"
            )

    def _foreign_entries(self) -> list[str]:
        """What a folder without a run's config holds (hidden files aside): names a run
        writes first, then the others; at most six."""
        try:
            names = [n.rstrip("/") for n in tf.io.gfile.listdir(self.output)]
        except tf.errors.NotFoundError:
            return []
        names = [n for n in names if not n.startswith(".")]
        ordered = [n for n in RUN_FILES if n in names] + sorted(set(names) - set(RUN_FILES))
        return ordered[:6] + (["..."] if len(ordered) > 6 else [])

    def load_history(self) -> list[dict]:
        """The epochs a resumed run already trained (none for a new run)."""
        path = self.path(METRICS)
        if tf.io.gfile.exists(path):
            with tf.io.gfile.GFile(path) as handle:
                return json.load(handle)["epochs"]
        return []

    def write_history(self, epochs: list[dict], resumed_from_step: int, diagnosis: dict) -> None:
        """Replaced whole (written aside, then renamed), so a reader never sees half."""
        tf.io.gfile.makedirs(self.output)
        path = self.path(METRICS)
        document = metrics_document(
            epochs, resumed_from_step=resumed_from_step, input_diagnosis=diagnosis
        )
        with tf.io.gfile.GFile(path + ".tmp", "w") as handle:
            json.dump(document, handle, indent=2)
        tf.io.gfile.rename(path + ".tmp", path, overwrite=True)

    def cleanup_worker_tmp(self) -> None:
        parent = self.path(WORKER_TMP)
        own = posixpath.join(parent, self.cluster.name)
        if tf.io.gfile.exists(own):
            tf.io.gfile.rmtree(own)
        try:  # the last worker out removes the shared parent; others find it non-empty
            if not tf.io.gfile.listdir(parent):
                tf.io.gfile.rmtree(parent)
        except (tf.errors.OpError, OSError):
            pass
