"""The tenant console: a no-build static site (HTML, ES modules, CSS) that uses only the public
`/v1/...` APIs, served same-origin beside them (`console.app`, `console.gateway`)."""
