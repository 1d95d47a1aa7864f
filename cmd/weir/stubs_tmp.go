package main

// Temporary stand-ins until the gateway and bench helpers add their files.
// The lead deletes this file.

import (
	"context"
	"errors"
)

func runGateway(ctx context.Context, args []string) error {
	return errors.New("gateway: not implemented yet")
}

func runBench(ctx context.Context, args []string) error {
	return errors.New("bench: not implemented yet")
}
