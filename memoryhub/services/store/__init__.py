"""The store: what every use case (write, import, forget, consolidation, indexing) does
to records at the lowest level, below any of them.

* :mod:`.locks`: the advisory locks writers and erasures take, in one order.
* :mod:`.refusals`: the read-only rule applied (the policy decides, the store counts
  and refuses).
* :mod:`.persistence`: storing written records (``COPY`` for large batches) and a
  fact's sources.
* :mod:`.bulk`: PostgreSQL's binary ``COPY`` of records and vectors.
* :mod:`.transient`: a transaction the database cancelled (a deadlock, a shard being
  moved) run again whole by the use case that opened it.
* :mod:`.deletion`: deleting records with what must go with them (sources detached,
  orphaned facts, the admin log).

Nothing here imports another service: the use cases import the store.
"""
