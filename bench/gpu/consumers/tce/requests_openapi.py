"""An empty stand-in for the requests_openapi package, on PYTHONPATH for TCE's cache.py only.

TCE's cache.py imports requests_openapi at module level for its "web" cache type
(WebClientCacheManager), which bench/gpu/consumers-proof.sh does not configure (its TCE config
names one cache of type "sig"). The real package needs openapi_pydantic, pydantic and
pydantic_core (a compiled extension); none of them is on the GPU machine and no package registry
reachable here serves them. Any use of this stand-in fails loudly.
"""


def __getattr__(name):
    raise ImportError(f"requests_openapi.{name}: stand-in only (TCE's web cache type is not used here)")
