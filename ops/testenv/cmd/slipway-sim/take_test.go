package main

import (
	"context"
	"testing"
	"time"
)

func TestTakePadsToTheDurationAndKeepsTheOutcome(t *testing.T) {
	start := time.Now()
	if err := take(context.Background(), []string{"300ms", "true"}); err != nil {
		t.Fatalf("take 300ms true: %v", err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("take 300ms true returned after %s", d)
	}
	if err := take(context.Background(), []string{"0s", "false"}); err == nil {
		t.Error("take 0s false: no error, want the command's failure")
	}
	if err := take(context.Background(), []string{"soon", "true"}); err == nil {
		t.Error("take soon: no error, want a bad duration")
	}
}
