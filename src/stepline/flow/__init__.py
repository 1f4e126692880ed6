"""Flow control: which instance runs next, and why this one is held.

The rules live here, once; each store executes them (SQLite in its write lock, PostgreSQL over a
few pipelined round trips under advisory locks) and each worker plans its claims by them. Read
top to bottom:

- ``rules``: the registered limits a claim applies, the scopes whose use it reads, their locks.
- ``admission``: whether a claim may take one runnable instance, given what runs and started.
- ``claiming``: one claim's decisions: what it takes, pauses or holds back, when it reads
  again, and when the worker should look again.
- ``parking``: busy keys' queues set aside, and the rule every slot-freeing write follows.
- ``floor``: where PostgreSQL's claims start reading the ready index, and the rule for writes.
- ``slots``: the named limits' slots that single steps take.
"""
