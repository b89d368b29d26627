"""The live board at `/ui`: servers, instances and each function's SLO, pushed to every open
page as server-sent events.

`series` keeps the per-function time series (pure), `readings` reads the platform into a
snapshot, `hub` is the one producer that builds a snapshot per interval and fans it out to
bounded per-page slots, `pages` answers the page, its assets, the event stream and a
function's detail. Routes are registered in `gateway.routes`. Gateway side: never imports
torch; nothing here runs on the request path.
"""
