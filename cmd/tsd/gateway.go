package main

import "errors"

type gatewayCmd struct{}

func (gatewayCmd) Run() error { return errors.New("not implemented yet") }
