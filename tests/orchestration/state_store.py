"""A task's state store as Airflow's task runner hands it to an operator, held in a dict.

`events` records its writes in order; the tests share the list with their hook
recorders, so they see that a job's id is stored before the wait starts and
forgotten only after the job succeeded.
"""


class StateStore(dict):
    def __init__(self, events: list | None = None, **stored):
        super().__init__(**stored)
        self.events = [] if events is None else events

    def set(self, key, value, retention=None):
        self[key] = value
        self.events.append(("store", value))

    def delete(self, key):
        self.pop(key, None)
        self.events.append(("forget", key))
