"""One topology per broker: fresh, uniquely named queues on a real broker, shared by the
driver tests (``tests/drivers``) and the end-to-end scenarios (``tests/e2e``).

A topology is synchronous (the e2e tests are; async driver tests may call it too: each call
is one short admin round trip). Add a broker by writing one module here with a class that
satisfies ``Topology`` (see ``base.py``) and a fixture that yields it.
"""
