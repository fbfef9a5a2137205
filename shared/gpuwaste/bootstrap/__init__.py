"""Bootstrap: composition roots — one per Lambda function and one for the local command."""
