package client

import (
	"context"
	"errors"

	"github.com/vesselhost/vessel/internal/api"
)

// Operation is a daemon operation the client can wait on.
type Operation struct {
	api.Operation
	c *Client
}

// Wait blocks until the operation is done, calling progress (if not nil)
// whenever its metadata may have changed. It returns the operation's error
// with the daemon's message; a cancelled operation's error wraps
// context.Canceled.
func (o *Operation) Wait(ctx context.Context, progress func(api.Operation)) error {
	for !o.Done() {
		timeout := "300"
		if progress != nil {
			timeout = "0.25"
			progress(o.Operation)
		}
		var cur api.Operation
		if _, err := o.c.do(ctx, "GET", "/1.0/operations/"+esc(o.ID)+"/wait?timeout="+timeout, nil, &cur); err != nil {
			return err
		}
		o.Operation = cur
	}
	if progress != nil {
		progress(o.Operation)
	}
	switch o.Status {
	case api.OperationSuccess:
		return nil
	case api.OperationCancelled:
		if o.Err == "" {
			return api.Errorf(context.Canceled, "operation cancelled")
		}
		return api.Errorf(context.Canceled, "%s", o.Err)
	}
	if o.Err == "" {
		return errors.New("operation failed")
	}
	return errors.New(o.Err)
}

// Cancel asks the daemon to cancel the operation.
func (o *Operation) Cancel(ctx context.Context) error {
	_, err := o.c.do(ctx, "DELETE", "/1.0/operations/"+esc(o.ID), nil, nil)
	return err
}

// Operations lists the daemon's operations.
func (c *Client) Operations(ctx context.Context) ([]api.Operation, error) {
	var out []api.Operation
	_, err := c.do(ctx, "GET", "/1.0/operations", nil, &out)
	return out, err
}

// GetOperation returns one operation.
func (c *Client) GetOperation(ctx context.Context, id string) (*Operation, error) {
	op := &Operation{c: c}
	_, err := c.do(ctx, "GET", "/1.0/operations/"+esc(id), nil, &op.Operation)
	return op, err
}
