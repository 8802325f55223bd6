package main

import "errors"

type planCmd struct{}

func (planCmd) Run() error { return errors.New("not implemented yet") }
