"""Fleet's HTTP API: problem details, submission parsing, response schemas, OpenAPI.

Theory of operation: the pieces of the HTTP interface that need neither the
database nor the scheduler loop, each in its own module: ``problems``
(RFC 9457 errors), ``submissions`` (a request body in, validated jobs out),
``schemas`` (the JSON the routes answer with) and ``openapi`` (the route table
and the OpenAPI document built from it).  This package imports the core and
the YAML models, never the other way round.  This file only documents the
package: import each name from the module that defines it.
"""
