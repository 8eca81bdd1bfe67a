-- `/clankie quiet <minutes>`: until when he answers nobody in a lane's channel.
ALTER TABLE lanes ADD COLUMN quiet_until TIMESTAMPTZ;
