"""Plain-Python oracles: each cache, policy and fleet loop written the obvious way, request by
request, to check the compiled code against (the conformance tests and ``benchmarks/``). They
ship with the tests, not the package: nothing a user runs imports them."""
