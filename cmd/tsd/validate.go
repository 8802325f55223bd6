package main

import "errors"

type validateCmd struct{}

func (validateCmd) Run() error { return errors.New("not implemented yet") }
