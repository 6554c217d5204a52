package testenv

import "context"

func (e *Env) startCluster(ctx context.Context, tools string) error { return nil }
