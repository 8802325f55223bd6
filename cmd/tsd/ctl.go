package main

import "errors"

type statusCmd struct{}

func (statusCmd) Run() error { return errors.New("not implemented yet") }

type restartCmd struct{}

func (restartCmd) Run() error { return errors.New("not implemented yet") }

type stopCmd struct{}

func (stopCmd) Run() error { return errors.New("not implemented yet") }

type logsCmd struct{}

func (logsCmd) Run() error { return errors.New("not implemented yet") }
