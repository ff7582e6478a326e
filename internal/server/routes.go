package server

import (
	"net/http"
)

// access says who may call a route.
type access int

const (
	// accessClient (the default): the local socket or a trusted client.
	accessClient access = iota
	// accessPeer: also a trusted peer host (migration).
	accessPeer
	// accessPublic: anyone who reaches the listener (answers are limited).
	accessPublic
	// accessPeerOnly: only a trusted peer host (incoming migrations).
	accessPeerOnly
)

// route is one API endpoint. Most endpoints return a response; streaming
// ones (exec, logs, migration) write to the connection themselves and return
// an error only when they have written nothing yet.
type route struct {
	method  string
	path    string
	handler func(r *http.Request) response
	stream  func(w http.ResponseWriter, r *http.Request) error
	access  access
	// long routes run for as long as their work takes (a stream, an
	// upload, a wait): the server's read and write timeouts are lifted
	// for them once the caller is authenticated (see Limits).
	long bool
	// rawBody routes take a body that is not JSON (an image), so it is
	// not bounded by MaxJSONBody.
	rawBody bool
}

// routes is the API, as data.
func (s *Server) routes() []route {
	return []route{
		{method: "GET", path: "/1.0", handler: s.getServer, access: accessPublic},
		{method: "GET", path: "/1.0/instances", handler: s.listInstances},
		{method: "POST", path: "/1.0/instances", handler: s.createInstance},
		{method: "GET", path: "/1.0/instances/{name}", handler: s.getInstance, access: accessPeer},
		{method: "DELETE", path: "/1.0/instances/{name}", handler: s.deleteInstance},
		{method: "PATCH", path: "/1.0/instances/{name}", handler: s.patchInstance},
		{method: "PUT", path: "/1.0/instances/{name}/state", handler: s.putInstanceState},
		{method: "GET", path: "/1.0/instances/{name}/exec", stream: s.execInstance, long: true},
		{method: "GET", path: "/1.0/instances/{name}/logs", stream: s.instanceLogs, long: true},
		{method: "GET", path: "/1.0/instances/{name}/console", stream: s.consoleInstance, long: true},
		{method: "POST", path: "/1.0/instances/{name}/files", handler: s.pushFile, long: true, rawBody: true},
		{method: "GET", path: "/1.0/instances/{name}/snapshots", handler: s.listSnapshots},
		{method: "POST", path: "/1.0/instances/{name}/snapshots", handler: s.createSnapshot},
		{method: "GET", path: "/1.0/instances/{name}/snapshots/{snap}", handler: s.getSnapshot},
		{method: "DELETE", path: "/1.0/instances/{name}/snapshots/{snap}", handler: s.deleteSnapshot},
		{method: "POST", path: "/1.0/instances/{name}/snapshots/{snap}/restore", handler: s.restoreSnapshot},
		{method: "GET", path: "/1.0/images", handler: s.listImages},
		{method: "POST", path: "/1.0/images", handler: s.importImage, long: true, rawBody: true},
		{method: "POST", path: "/1.0/images/build", handler: s.buildImage},
		{method: "GET", path: "/1.0/images/{ref}", handler: s.getImage},
		{method: "DELETE", path: "/1.0/images/{ref}", handler: s.deleteImage},
		{method: "GET", path: "/1.0/operations", handler: s.listOperations},
		{method: "GET", path: "/1.0/operations/{id}", handler: s.getOperation},
		{method: "GET", path: "/1.0/operations/{id}/wait", handler: s.waitOperation, long: true},
		{method: "DELETE", path: "/1.0/operations/{id}", handler: s.cancelOperation},
		{method: "GET", path: "/1.0/storage", handler: s.getStorage},
		{method: "GET", path: "/1.0/metrics", stream: s.metrics},
		{method: "POST", path: "/1.0/tokens", handler: s.issueToken},
		{method: "GET", path: "/1.0/certificates", handler: s.listCertificates},
		{method: "POST", path: "/1.0/certificates", handler: s.addCertificate, access: accessPublic},
		{method: "DELETE", path: "/1.0/certificates/{ref}", handler: s.removeCertificate},
		{method: "GET", path: "/1.0/peers", handler: s.listPeers},
		{method: "POST", path: "/1.0/peers", handler: s.addPeer},
		{method: "DELETE", path: "/1.0/peers/{name}", handler: s.removePeer},
		{method: "POST", path: "/1.0/instances/{name}/migrate", handler: s.migrateInstance},
		{method: "GET", path: "/1.0/migration", stream: s.acceptMigration, access: accessPeerOnly, long: true},
	}
}
