package api

// A file push: POST /1.0/instances/{name}/files?path=/ABSOLUTE/PATH with
// the file's bytes as the body (application/octet-stream) and its owner
// and mode in these headers (decimal uid and gid, octal mode; absent: 0,
// 0 and 0644). The file is written atomically: the path holds its old
// content or all of the new one.
const (
	FileUIDHeader  = "X-Vessel-Uid"
	FileGIDHeader  = "X-Vessel-Gid"
	FileModeHeader = "X-Vessel-Mode"
)

// FilePush is a pushed file's owner and mode, as the instance sees them.
type FilePush struct {
	UID, GID uint32
	// Mode holds permission and set-id bits (0 means 0644).
	Mode uint32
}
