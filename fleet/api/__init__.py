"""Fleet's HTTP API: problem details, submission parsing, response schemas, OpenAPI.

Theory of operation: the pieces of the HTTP interface that need neither the
database nor the scheduler loop, each in its own module: ``problems``
(RFC 9457 errors), ``submissions`` (a request body in, validated jobs out),
``schemas`` (the JSON the routes answer with), ``routing`` (how a route is
declared, once, beside its handler: the router, the reading of its
parameters and the role check come from that declaration) and ``openapi``
(the OpenAPI document built from the declarations).  This package imports the core and
the YAML models, never the other way round.  This file only documents the
package: import each name from the module that defines it.
"""
