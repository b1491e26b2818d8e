"""The API's views, by what they are about. They parse, call a service or selector, and
render; refusals are the exception handler's (``dataflow.api.errors``)."""
