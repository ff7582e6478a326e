package server

import (
	"net/http"
)

// route is one API endpoint. Most endpoints return a response; streaming
// ones (exec, logs) write to the connection themselves and return an error
// only when they have written nothing yet.
type route struct {
	method  string
	path    string
	handler func(r *http.Request) response
	stream  func(w http.ResponseWriter, r *http.Request) error
}

// routes is the API, as data.
func (s *Server) routes() []route {
	return []route{
		{"GET", "/1.0", s.getServer, nil},
		{"GET", "/1.0/instances", s.listInstances, nil},
		{"POST", "/1.0/instances", s.createInstance, nil},
		{"GET", "/1.0/instances/{name}", s.getInstance, nil},
		{"DELETE", "/1.0/instances/{name}", s.deleteInstance, nil},
		{"PATCH", "/1.0/instances/{name}", s.patchInstance, nil},
		{"PUT", "/1.0/instances/{name}/state", s.putInstanceState, nil},
		{"GET", "/1.0/instances/{name}/exec", nil, s.execInstance},
		{"GET", "/1.0/instances/{name}/logs", nil, s.instanceLogs},
		{"GET", "/1.0/images", s.listImages, nil},
		{"POST", "/1.0/images", s.importImage, nil},
		{"POST", "/1.0/images/build", s.buildImage, nil},
		{"GET", "/1.0/images/{ref}", s.getImage, nil},
		{"DELETE", "/1.0/images/{ref}", s.deleteImage, nil},
		{"GET", "/1.0/operations", s.listOperations, nil},
		{"GET", "/1.0/operations/{id}", s.getOperation, nil},
		{"GET", "/1.0/operations/{id}/wait", s.waitOperation, nil},
		{"DELETE", "/1.0/operations/{id}", s.cancelOperation, nil},
		{"GET", "/1.0/storage", s.getStorage, nil},
		{"GET", "/1.0/metrics", nil, s.metrics},
	}
}
