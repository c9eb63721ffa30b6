"""Beam's SDK worker pool (EXTERNAL environment) for several TaskManagers or Spark executors
at once, as scripts/clusters.sh runs it on one machine.

Beam's own pool (apache_beam.runners.worker.worker_pool_main) keeps its workers by the id the
runner sends and stops by it; each TaskManager or executor numbers its workers from 1, so on
a shared pool a stop for "1-1" can end another executor's worker, which then waits forever
for it. Here a stop ends nothing: a worker exits by itself when its runner closes the control
channel, and the pool ends every worker it started when it stops.
"""

import logging
import sys
import time

from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners.worker.worker_pool_main import BeamFnExternalWorkerPoolServicer


class SharedWorkerPool(BeamFnExternalWorkerPoolServicer):
    def StartWorker(self, start_worker_request, unused_context):
        # Keep every process (ids repeat across runners) for the stop at exit.
        response = super().StartWorker(start_worker_request, unused_context)
        process = self._worker_processes.pop(start_worker_request.worker_id, None)
        if process is not None:
            self._worker_processes[f"{start_worker_request.worker_id}@{process.pid}"] = process
        return response

    def StopWorker(self, stop_worker_request, unused_context):
        return beam_fn_api_pb2.StopWorkerResponse()


def main(port: int) -> None:
    logging.basicConfig(level=logging.INFO)
    address, server = SharedWorkerPool.start(use_process=True, port=port)
    logging.info("shared SDK worker pool at %s", address)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop(0)


if __name__ == "__main__":
    main(int(sys.argv[1]))
