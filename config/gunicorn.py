"""gunicorn's settings for the site (``gunicorn -c python:config.gunicorn``).

With ``--preload`` the application is loaded once, in the master, before it forks the
workers: each worker then starts its own trace exporter (an exporter's thread does not
survive a fork; ``memoryhub.tracing``). Prometheus's per-process counters need nothing
here: ``prometheus_client`` starts a process's files afresh after a fork.
"""


def post_fork(server: object, worker: object) -> None:
    from memoryhub import tracing

    tracing.configure()
