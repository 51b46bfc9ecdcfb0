"""The HTTP mechanism every client of the project stands on (the Actions service, GitHub's
REST API, HUD), and the one-line error text the Key Vault read shares.

- :mod:`base.http.client`: the one module that imports httpx: client construction (TLS, Go's
  proxy rules, deadlines), one attempt under a deadline, capped body reads;
- :mod:`base.http.errors` (pure): the error tree every HTTP failure is told with;
- :mod:`base.http.headers` (pure): ``Retry-After`` and GitHub's rate-limit headers;
- :mod:`base.http.proxy`: Go's ``HTTP_PROXY``/``HTTPS_PROXY``/``NO_PROXY`` rules.

Policy stays with the callers: which statuses the Actions client retries (``listener.http``,
the one retry layer), what a demand source does with a failure (it never retries).
"""
