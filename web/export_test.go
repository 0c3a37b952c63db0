package web

// RoutePatterns returns the method and path patterns the handler serves
// beside the UI (with Options.Metrics set), for the OpenAPI test.
func RoutePatterns() []string {
	s := &server{}
	out := []string{"GET /healthz", "GET /readyz", "GET /metrics", "GET /api/v1/whoami"}
	for _, r := range append(append(append(s.routes(), s.consoleRoutes()...), s.pendingRoutes()...), s.leaseRoutes()...) {
		out = append(out, r.pattern)
	}
	return out
}
