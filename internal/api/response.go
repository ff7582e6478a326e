package api

import "encoding/json"

// Response types.
const (
	ResponseSync  = "sync"
	ResponseAsync = "async"
	ResponseError = "error"
)

// Response is the envelope of every non-streaming reply.
type Response struct {
	Type       string          `json:"type"`
	Status     string          `json:"status,omitempty"`
	StatusCode int             `json:"status_code,omitempty"`
	Operation  string          `json:"operation,omitempty"`
	ErrorCode  int             `json:"error_code,omitempty"`
	Error      string          `json:"error,omitempty"`
	Metadata   json.RawMessage `json:"metadata,omitempty"`
}
