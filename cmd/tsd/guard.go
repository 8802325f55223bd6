package main

import "errors"

type guardCmd struct{}

func (guardCmd) Run() error { return errors.New("not implemented yet") }
