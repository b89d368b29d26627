"""The HTTP gateway: every route (registered in `routes`), the OpenFaaS system routes, the
invoke route, the Open Inference Protocol, metrics, auth and logs. HTTP only: what a
request does is the control and data planes'."""
