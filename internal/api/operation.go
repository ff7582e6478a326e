package api

import "time"

// Operation statuses.
const (
	OperationPending   = "Pending"
	OperationRunning   = "Running"
	OperationSuccess   = "Success"
	OperationFailure   = "Failure"
	OperationCancelled = "Cancelled"
)

// Operation is long-running work done by the daemon.
type Operation struct {
	ID          string    `json:"id"`
	Description string    `json:"description"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
	Status      string    `json:"status"`
	// Resources names the objects the operation works on, e.g.
	// {"instances": ["/1.0/instances/web1"]}.
	Resources map[string][]string `json:"resources,omitempty"`
	// Metadata carries progress while running and the result when done.
	Metadata  map[string]any `json:"metadata,omitempty"`
	MayCancel bool           `json:"may_cancel"`
	Err       string         `json:"err,omitempty"`
}

// Done reports whether the operation has finished, whatever the outcome.
func (o Operation) Done() bool {
	switch o.Status {
	case OperationSuccess, OperationFailure, OperationCancelled:
		return true
	}
	return false
}
